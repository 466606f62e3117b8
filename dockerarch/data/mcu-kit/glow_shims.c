/* What a Glow bundle's libjit code references from glibc that newlib names otherwise.
 * libjit is compiled on the host against glibc's headers, so its assert() calls glibc's
 * __assert_fail; newlib's assert calls __assert_func. */
#include <assert.h>

void __assert_fail(const char *assertion, const char *file, unsigned int line,
                   const char *function) {
    __assert_func(file, (int)line, function, assertion);
}
