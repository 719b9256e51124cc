/*
 * getenv prints what C's getenv(3) returns for each variable named on its command line, one
 * "getenv: NAME=VALUE" line each ("getenv: NAME unset" when absent), then "getenv: done".
 * It is the reader a CUDA program or HAMi-core (a C library) is: glibc's getenv returns the
 * FIRST entry of a duplicated name, a shell the last. Built static (gcc -static) into the local
 * cluster's workload image as /bin/getenv (hack/cluster/components.sh, case C37).
 */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		const char *v = getenv(argv[i]);
		if (v)
			printf("getenv: %s=%s\n", argv[i], v);
		else
			printf("getenv: %s unset\n", argv[i]);
	}
	printf("getenv: done\n");
	fflush(stdout);
	return 0;
}
