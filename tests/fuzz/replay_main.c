// SPDX-License-Identifier: MIT
/*
 * replay_main.c: runs a libFuzzer harness over files and folders (its corpus and its
 * regression inputs) without libFuzzer, so `make test` replays every corpus with the
 * build's own compiler and sanitizers. Exit status 0 when every input ran.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
	size_t got = buf ? fread(buf, 1, (size_t)(len > 0 ? len : 0), f) : 0;
	fclose(f);
	if (!buf)
		return -1;
	LLVMFuzzerTestOneInput(buf, got);
	free(buf);
	(*n)++;
	return 0;
}

static int replay_path(const char *path, size_t *n)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return 0; /* a corpus not created yet */
	if (!S_ISDIR(st.st_mode))
		return replay_file(path, n);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	struct dirent *e;
	int rc = 0;
	while ((e = readdir(d)) != NULL && rc == 0) {
		if (e->d_name[0] == '.')
			continue;
		char p[4096];
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		rc = replay_path(p, n);
	}
	closedir(d);
	return rc;
}

int main(int argc, char **argv)
{
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	size_t n = 0;
	for (int i = 1; i < argc; i++) {
		if (replay_path(argv[i], &n) != 0) {
			fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[i]);
			return 1;
		}
	}
	printf("%s: %zu inputs replayed\n", argv[0], n);
	return 0;
}
