// libFuzzer's entry for programs with their own main (compiler-rt FuzzerInterface.h). The symbol exists only in
// builds linked with -sanitize=fuzzer; SiwaFuzz refers to it only when compiled with -DFUZZING.
#ifndef SIWA_CFUZZERDRIVER_H
#define SIWA_CFUZZERDRIVER_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
