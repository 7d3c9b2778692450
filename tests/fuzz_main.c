/* fuzz_main.c - the main() of every fuzz harness when it is built without libFuzzer
 * (the plain build): replays each file given, and every prefix of it (the
 * truncations a crash would leave), through LLVMFuzzerTestOneInput. Bazel runs it
 * over the seed corpus as a regression test; tests/fuzz.sh builds the harnesses
 * with -fsanitize=fuzzer instead (--config=fuzz), which brings its own main().
 * It must never skip an input it cannot read: that is a failure.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
	static uint8_t data[1 << 20];
	int n = 0;
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		if (!f) {
			fprintf(stderr, "%s: %s: cannot open\n", argv[0], argv[i]);
			return 1;
		}
		size_t len = fread(data, 1, sizeof(data), f);
		fclose(f);
		for (size_t cut = 0; cut < len; cut += 1 + len / 64)
			LLVMFuzzerTestOneInput(data, cut);
		LLVMFuzzerTestOneInput(data, len);
		n++;
	}
	printf("%s: %d inputs replayed\n", argv[0], n);
	return n ? 0 : 1;
}
