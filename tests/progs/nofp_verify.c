// SPDX-License-Identifier: MIT
/*
 * nofp_verify.c: verify_fp's program built the way most programs ship (-O2, no frame
 * pointers; the Makefile's nofp_ rule), for `llgo-heap verify` in the DWARF unwinding mode:
 * the kernel's frame-pointer walk means nothing here, so the daemon unwinds the kernel's
 * stack copy. Same usage and output as verify_fp.
 */
#include "verify_fp.c"
