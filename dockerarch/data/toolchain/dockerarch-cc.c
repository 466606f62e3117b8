/* dockerarch-cc: the compiler driver of hybrid builds.
 *
 * An x86-64 program grafted into the emulated ARM build stage under the names gcc, cc, g++, c++,
 * cpp and <triplet>-gcc[-N] (and so on). It records each invocation (the machine it runs on, as
 * the kernel reports it, the name it was called by, and the program that started it: the
 * basename of its parent's executable, which for an emulated parent is QEMU's binfmt
 * interpreter) in $DOCKERARCH_TOOLCHAIN_LOG, then execs
 * ccache with Debian's cross compiler, or the cross compiler alone when ccache is off. Being
 * x86-64 code itself, it never runs under QEMU: the log proves the compiles ran natively.
 *
 * dockerarch-cc --report prints one summary line of that log; it fails when a recorded run was
 * not native. Built in the toolchain stage with -DTRIPLET="..." -DGCC_MAJOR="...".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#define CCACHE "/usr/lib/dockerarch/libexec/ccache"

static const char *real_compiler(const char *name) {
    static char path[256];
    const char *tool = "gcc";
    if (strcmp(name, "g++") == 0 || strcmp(name, "c++") == 0 || strstr(name, "-g++") != NULL) {
        tool = "g++";
    } else if (strcmp(name, "cpp") == 0 || strstr(name, "-cpp") != NULL) {
        tool = "cpp";
    }
    snprintf(path, sizeof path, "/usr/bin/%s-%s-%s", TRIPLET, tool, GCC_MAJOR);
    return path;
}

/* The basename of the parent's executable: "dash", "ninja", "make" for a native build driver,
 * QEMU's interpreter ("qemu-arm", "arm-binfmt-P") for an emulated one. */
static const char *parent_program(void) {
    static char target[512];
    char link[64];
    snprintf(link, sizeof link, "/proc/%d/exe", (int)getppid());
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) {
        return "unknown";
    }
    target[n] = '\0';
    char *space = strchr(target, ' ');  /* " (deleted)" */
    if (space != NULL) {
        *space = '\0';
    }
    const char *slash = strrchr(target, '/');
    return slash != NULL ? slash + 1 : target;
}

static int emulated_program(const char *program) {
    return strstr(program, "qemu") != NULL || strstr(program, "binfmt") != NULL;
}

static void record(const char *name, int argc, char **argv) {
    const char *log = getenv("DOCKERARCH_TOOLCHAIN_LOG");
    if (log == NULL || *log == '\0') {
        return;
    }
    struct utsname uts;
    if (uname(&uts) != 0) {
        strcpy(uts.machine, "unknown");
    }
    int compiles = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0) {
            compiles = 1;
        }
    }
    char line[512];
    int n = snprintf(line, sizeof line, "%s %s %s %s\n", uts.machine, name,
                     compiles ? "compile" : "other", parent_program());
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) < 0) { /* a lost log line never fails a compile */ }
        close(fd);
    }
}

static int report(void) {
    const char *log = getenv("DOCKERARCH_TOOLCHAIN_LOG");
    FILE *f = log ? fopen(log, "r") : NULL;
    long runs = 0, compiles = 0, foreign = 0, by_emulated = 0;
    char machine[128], name[256], kind[32], parent[256];
    while (f && fscanf(f, "%127s %255s %31s %255s", machine, name, kind, parent) == 4) {
        runs++;
        compiles += strcmp(kind, "compile") == 0;
        foreign += strcmp(machine, "x86_64") != 0;
        by_emulated += emulated_program(parent);
    }
    if (f) {
        fclose(f);
    }
    printf("dockerarch hybrid: %ld compiler runs (%ld compiles), %ld native x86_64, %ld emulated; "
           "started by native programs %ld, by emulated ones %ld\n",
           runs, compiles, runs - foreign, foreign, runs - by_emulated, by_emulated);
    return foreign == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc == 2 && strcmp(argv[1], "--report") == 0) {
        return report();
    }
    record(name, argc, argv);
    const char *compiler = real_compiler(name);
    const char *use_ccache = getenv("DOCKERARCH_CCACHE");
    if ((use_ccache == NULL || strcmp(use_ccache, "0") != 0) && access(CCACHE, X_OK) == 0) {
        char **args = calloc((size_t)argc + 2, sizeof *args);
        if (args == NULL) {
            return 127;
        }
        args[0] = (char *)CCACHE;
        args[1] = (char *)compiler;
        for (int i = 1; i < argc; i++) {
            args[i + 1] = argv[i];
        }
        execv(CCACHE, args);
    }
    argv[0] = (char *)compiler;
    execv(compiler, argv);
    fprintf(stderr, "dockerarch-cc: cannot run %s: %s\n", compiler, strerror(errno));
    return 127;
}
