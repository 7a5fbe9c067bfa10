// SPDX-License-Identifier: MIT
// wasi_run.mjs: run a wasm32-wasi program under Node's WASI (preview1) with the given
// arguments; its standard output and exit status are the program's.
//   node wasi_run.mjs PROG.wasm [ARG...]
// Works with Debian 12's Node 18 and with newer releases (getImportObject is newer).
import { readFile } from 'node:fs/promises';
import { argv, exit } from 'node:process';
import { WASI } from 'node:wasi';

const wasi = new WASI({ version: 'preview1', args: argv.slice(2), env: {}, returnOnExit: true });
const imports = typeof wasi.getImportObject === 'function'
	? wasi.getImportObject()
	: { wasi_snapshot_preview1: wasi.wasiImport };
const module = await WebAssembly.compile(await readFile(argv[2]));
const instance = await WebAssembly.instantiate(module, imports);
exit(wasi.start(instance));
