// SPDX-License-Identifier: MIT
/*
 * human.c: byte counts for people ("12.5MiB", "512B", "+1.0GiB/s"), for the tables of
 * `top --watch` (watch.c) and `diff` (diff.c).
 */
#include <stdio.h>

#include "cli.h"

void human_bytes(char *out, size_t n, double v, const char *suffix)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	const char *sign = v < 0 ? "-" : (suffix[0] == '+' ? "+" : "");
	double a = v < 0 ? -v : v;
	size_t u = 0;
	while (a >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		a /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(out, n, "%s%.0f%s%s", sign, a, units[u], suffix[0] == '+' ? suffix + 1 : suffix);
	else
		snprintf(out, n, "%s%.1f%s%s", sign, a, units[u], suffix[0] == '+' ? suffix + 1 : suffix);
}
