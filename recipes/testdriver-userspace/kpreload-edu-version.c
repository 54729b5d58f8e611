// SPDX-License-Identifier: GPL-2.0
/*
 * kpreload-edu-version: prints the version of the test driver's userspace
 * library it finds by soname (dlopen "libkpreload_edu.so.1", through the
 * linker cache) and what each /dev/kpreload-edu<N> device says (the loaded
 * module's version):
 *
 *   library 1.0.0 (libkpreload_edu.so.1)
 *   device /dev/kpreload-edu0: kpreload-edu 1.0.0 id 0x010000ed
 *
 * Exit status 0 when the library loaded and every device agrees with it.
 */
#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	void *h = dlopen("libkpreload_edu.so.1", RTLD_NOW);
	if (!h) {
		printf("library: %s\n", dlerror());
		return 1;
	}
	const char *(*version)(void) = (const char *(*)(void))dlsym(h, "kpreload_edu_version");
	if (!version) {
		printf("library: %s\n", dlerror());
		return 1;
	}
	const char *v = version();
	printf("library %s (libkpreload_edu.so.1)\n", v);

	int status = 0;
	glob_t g;
	if (glob("/dev/kpreload-edu*", 0, NULL, &g) != 0) {
		printf("devices: none\n");
		return 2;
	}
	for (size_t i = 0; i < g.gl_pathc; i++) {
		char line[128] = "";
		FILE *f = fopen(g.gl_pathv[i], "r");
		if (!f || !fgets(line, sizeof(line), f)) {
			printf("device %s: cannot read\n", g.gl_pathv[i]);
			status = 3;
			if (f)
				fclose(f);
			continue;
		}
		fclose(f);
		line[strcspn(line, "\n")] = 0;
		printf("device %s: %s\n", g.gl_pathv[i], line);
		char want[64];
		snprintf(want, sizeof(want), "kpreload-edu %s ", v);
		if (strncmp(line, want, strlen(want)) != 0)
			status = 4;
	}
	globfree(&g);
	return status;
}
