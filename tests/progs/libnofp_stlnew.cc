// SPDX-License-Identifier: MIT
/*
 * libnofp_stlnew.cc: operator new and delete defined by a library built -O2 without frame
 * pointers, preloaded after the shim (LD_PRELOAD="libllgoheap.so libnofp_stlnew.so"), as an
 * allocator library that brings its own operators would be: the shim forwards every operator
 * new to this one (its forward mode), which calls malloc. For test_unwind, with nofp_stl.
 */
#define STL_NEW_ATTR
#include "stl_new.h"
