// SPDX-License-Identifier: MIT
// wasi_run.mjs: run a wasm32-wasi program under Node's WASI (preview1) with the given
// arguments; its standard output and exit status are the program's.
//   node wasi_run.mjs PROG.wasm [ARG...]
import { readFile } from 'node:fs/promises';
import { argv, exit } from 'node:process';
import { WASI } from 'node:wasi';

const wasi = new WASI({ version: 'preview1', args: argv.slice(2), env: {}, returnOnExit: true });
const module = await WebAssembly.compile(await readFile(argv[2]));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
exit(wasi.start(instance));
