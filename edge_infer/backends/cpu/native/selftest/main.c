/* Self-test driver for the native kernels: links the library sources statically and calls
 * every kernel group's ei_selftest_<group>() (SIMD paths vs the scalar path on seeded random
 * data; each returns its number of failures), once with every ISA feature of this CPU and once
 * with the mask cleared (the scalar paths alone).
 *
 * The groups are weak references: a group whose source file is absent (or not yet written)
 * reads as NULL and is reported "absent" instead of breaking the link. Add new groups to
 * GROUPS. Built and run by tests/test_native_arm.py: natively (x86-64: AVX2 vs scalar) and
 * cross-compiled for aarch64 under qemu-aarch64-static (-cpu cortex-a72: NEON without the dot
 * product; -cpu max: with it). Exit status: 0 when every present group passed.
 */
#include <stdio.h>
#include <string.h>

int ei_cpu_features(void);
int ei_set_isa_mask(int mask);

#define GROUP(name) extern int ei_selftest_##name(void) __attribute__((weak));
#define GROUPS(X) X(pool) X(epilogue) X(int8_gemm) X(depthwise) X(sparse) X(elementwise) X(layout) X(qdq) X(int8_ops) X(conv_f32) X(depthwise_f32) X(resize) X(convt_f32) X(winograd_f32) X(conv_stem_f32) X(int8_stem)
GROUPS(GROUP)
#undef GROUP

typedef struct { const char *name; int (*fn)(void); } group_t;
#define ENTRY(name) { #name, ei_selftest_##name },
static const group_t groups[] = { GROUPS(ENTRY) };
#undef ENTRY

int main(int argc, char **argv) {
    int f = ei_cpu_features(), failed = 0, ran = 0;
    printf("features: 0x%x (avx2 %d, avx512 %d, neon %d, dotprod %d)\n", f, !!(f & 1), !!(f & 2),
           !!(f & 4), !!(f & 8));
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        if (argc > 1 && strcmp(argv[1], groups[i].name) != 0) continue;
        if (!groups[i].fn) { printf("%-12s absent\n", groups[i].name); continue; }
        int masks[2] = { -1, 0 };
        for (int j = 0; j < 2; j++) {
            ei_set_isa_mask(masks[j]);
            int r = groups[i].fn();
            printf("%-12s %-6s %s (%d failures)\n", groups[i].name, j ? "scalar" : "simd", r ? "FAIL" : "ok", r);
            failed += r != 0;
            ran++;
        }
        ei_set_isa_mask(-1);
    }
    printf("%d runs, %d failed\n", ran, failed);
    return failed ? 1 : 0;
}
