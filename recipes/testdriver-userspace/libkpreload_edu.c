// SPDX-License-Identifier: GPL-2.0
/*
 * libkpreload_edu: the test driver's userspace library, built per driver
 * version (VERSION at build time), as a GPU driver's libcuda/libnvidia-ml are.
 * kpreload-edu-version loads it by its soname, libkpreload_edu.so.1, the way
 * CUDA programs load libcuda.so.1, so a container proves the CDI spec mounted
 * the active version's library and made the linker find it.
 */
#ifndef KPRELOAD_EDU_VERSION
#error "KPRELOAD_EDU_VERSION is not set"
#endif

const char *kpreload_edu_version(void)
{
	return KPRELOAD_EDU_VERSION;
}
