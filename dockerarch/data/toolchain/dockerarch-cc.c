/* dockerarch-cc: the compiler driver of hybrid builds.
 *
 * An x86-64 program grafted into the emulated ARM build stage under the names gcc, cc, g++, c++,
 * cpp and <triplet>-gcc[-N] (and so on). It records each invocation (the machine it runs on, as
 * the kernel reports it, the name it was called by, and the program that started it: the
 * basename of its parent's executable, which for an emulated parent is QEMU's binfmt
 * interpreter followed by the emulated program, "arm-binfmt-P:cmake") in
 * $DOCKERARCH_TOOLCHAIN_LOG, then execs
 * ccache with Debian's cross compiler, or the cross compiler alone when ccache is off. Being
 * x86-64 code itself, it never runs under QEMU: the log proves the compiles ran natively.
 *
 * dockerarch-cc --report prints one summary line of that log; it fails when a recorded run was
 * not native. Built in the toolchain stage with -DTRIPLET="..." -DGCC_MAJOR="...".
 *
 * With a compile farm (`dockerarch build --farm`: the hosts line in the build secret
 * dockerarch-farm), compiles go through distcc: ccache stays in front and runs dockerarch-distcc
 * (this program under that name) as its prefix command, which runs distcc with the compiler's
 * farm name, dockerarch-<toolchain digest>-<triplet>-gcc (a farm server whitelists only the
 * names of its own toolchain's digest), and records where the compile ran ("HOST ok", "localhost
 * ok retried-after HOST") in $DOCKERARCH_FARM_LOG. A server that fails is said on stderr, never
 * absorbed silently: distcc compiles locally instead and the log counts it.
 *
 * ccache's compiler_check is the toolchain's digest (the same files give the same keys on every
 * machine, other files never do), and with a team's shared compiler cache (the build secret
 * dockerarch-ccache-remote: "URL|ATTRIBUTES", credentials in the URL) ccache's remote storage is
 * URL/<first 16 hex digits of the digest>: objects of different toolchains never meet. A shared
 * cache that fails one compile of a build (down, refusing, too slow: every later compile would
 * wait for the same timeouts) is not asked again by that build: ccache's per-run counters are
 * read after each run that used it, and a failure leaves <stats log>.remote-down, after which
 * compiles use the local cache only, each counted in the stats log ("remote_storage_skipped").
 *
 * ccache runs in its depend mode (CCACHE_DEPEND, set by the build stage): a result is keyed on
 * the source and on the headers the compiler's own dependency file lists, so a miss never runs
 * the preprocessor a second time. A cold miss then costs about 1% over the compiler alone, where
 * the default mode cost 5-9% (Brotli's C, LightGBM's C++: bench/README.md). The mode applies to
 * compiles that ask for a dependency file (-MD, -MMD: CMake's and Meson's ninja rules do); a C
 * or C++ compile that asks for none (setuptools', most makefiles') gets one in a temporary file
 * of this program's own, removed after the compile: the build sees no new file and no other
 * output. A build environment's empty <venv>/include (whose random path setuptools adds to
 * every compile) is left out of what ccache runs: the compiler
 * finds nothing there either way, and one build's keys are then the next build's (in the
 * default mode the preprocessed output matched across builds; the depend mode keys the options).
 * Headers from the build environment (numpy's, pybind11's) reach ccache through one symbolic
 * link of a fixed name (BUILD_ENV_LINK), so that their paths, in the options and in the
 * dependency list, are the same in every build: a resumed build, or a fresh machine with the
 * team's cache, takes those objects from the cache too (their random paths made every one a
 * miss, in either mode).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CCACHE /* -DCCACHE=... where the wrapper is tested outside an image */
#define CCACHE "/usr/lib/dockerarch/libexec/ccache"
#endif
#ifndef DISTCC /* -DDISTCC=... -DFARM_HOSTS=... -DTOOLCHAIN_ID=...: the farm's side, tested */
#define DISTCC "/usr/lib/dockerarch/libexec/distcc"
#endif
#define DISTCC_PREFIX "/usr/lib/dockerarch/bin/dockerarch-distcc"
#define FARM_NAMES "/usr/lib/dockerarch/farm"
#ifndef FARM_HOSTS
#define FARM_HOSTS "/run/secrets/dockerarch-farm"
#endif
#ifndef TOOLCHAIN_ID
#define TOOLCHAIN_ID "/usr/lib/dockerarch/toolchain-id"
#endif
#define CACHE_REMOTE "/run/secrets/dockerarch-ccache-remote"

/* The cross tool a name stands for: "gcc", "g++", "cpp" or "gfortran". */
static const char *tool_of(const char *name) {
    if (strcmp(name, "g++") == 0 || strcmp(name, "c++") == 0 || strstr(name, "-g++") != NULL) {
        return "g++";
    }
    if (strcmp(name, "cpp") == 0 || strstr(name, "-cpp") != NULL) {
        return "cpp";
    }
    if (strcmp(name, "gfortran") == 0 || strcmp(name, "f77") == 0 || strcmp(name, "f95") == 0
        || strstr(name, "-gfortran") != NULL) {
        return "gfortran";
    }
    return "gcc";
}

static const char *real_compiler(const char *name) {
    static char path[256];
    snprintf(path, sizeof path, "/usr/bin/%s-%s-%s", TRIPLET, tool_of(name), GCC_MAJOR);
    return path;
}

/* The <venv>/include of a build environment with nothing in it (or none at all), which
 * setuptools adds to every compile: uv's <cache>/builds-v0/.tmpXXXX/include (its cache, or a
 * temporary one under /tmp), virtualenv's /tmp/.../include. The wrapper leaves it out of what
 * ccache runs: the compiler finds nothing there either way, and its random path would make
 * every build's keys new. */
static int empty_build_env_include(const char *path) {
    size_t n = strlen(path);
    if (n < 8 || strcmp(path + n - 8, "/include") != 0
        || (strncmp(path, "/tmp/", 5) != 0 && strstr(path, "/builds-v0/") == NULL)) {
        return 0;
    }
    DIR *dir = opendir(path);
    if (dir == NULL) {
        return errno == ENOENT;
    }
    int empty = 1;
    struct dirent *entry;
    while (empty && (entry = readdir(dir)) != NULL) {
        empty = strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0;
    }
    closedir(dir);
    return empty;
}

/* Headers a build takes from its build environment (numpy's, pybind11's: <env>/lib/python3.N/
 * site-packages/...) have a path with the environment's random name in it (uv's
 * <cache>/builds-v0/.tmpXXXX), in the compile's -I and in the dependency list ccache keys on:
 * no such compile would ever hit the cache of an earlier build (a resumed build's, the team's).
 * The wrapper gives ccache the same path through BUILD_ENV_LINK, a symbolic link to the
 * environment: the compiler reads the same files, and the keys are the same in every build
 * whose environment holds the same files. One build step builds in one environment at a time
 * (its /tmp is its own); a link to another environment that still exists is left alone, and
 * the compile keeps its own path. */
#define BUILD_ENV_LINK "/tmp/dockerarch-build-env"

static int link_to(const char *root) {
    char current[4096], tmp[64];
    ssize_t got = readlink(BUILD_ENV_LINK, current, sizeof current - 1);
    if (got >= 0) {
        current[got] = '\0';
        struct stat st;
        if (strcmp(current, root) == 0) {
            return 1;
        }
        if (stat(current, &st) == 0) {
            return 0;  /* another environment, still there */
        }
    } else if (errno != ENOENT) {
        return 0;  /* not a link */
    }
    snprintf(tmp, sizeof tmp, "%s.%d", BUILD_ENV_LINK, (int)getpid());
    unlink(tmp);
    if (symlink(root, tmp) != 0 || rename(tmp, BUILD_ENV_LINK) != 0) {
        unlink(tmp);
        return 0;
    }
    got = readlink(BUILD_ENV_LINK, current, sizeof current - 1);
    return got >= 0 && (current[got] = '\0', strcmp(current, root) == 0);
}

/* PATH inside a build environment as the same path through BUILD_ENV_LINK (allocated), or
 * NULL: not in one, or the link is not this environment's. */
static char *through_build_env_link(const char *path) {
    const char *mark = path[0] == '/' ? strstr(path, "/builds-v0/.tmp") : NULL;
    if (mark == NULL) {
        return NULL;
    }
    const char *end = strchr(mark + strlen("/builds-v0/"), '/');
    size_t root_len = end != NULL ? (size_t)(end - path) : strlen(path);
    char root[4096];
    if (root_len >= sizeof root) {
        return NULL;
    }
    memcpy(root, path, root_len);
    root[root_len] = '\0';
    if (!link_to(root)) {
        return NULL;
    }
    char *out = malloc(strlen(BUILD_ENV_LINK) + strlen(path + root_len) + 1);
    if (out != NULL) {
        sprintf(out, "%s%s", BUILD_ENV_LINK, path + root_len);
    }
    return out;
}

/* What ccache is given for the include directory DIR: NULL to leave it out (a build
 * environment's empty include), for a compile its path through BUILD_ENV_LINK, else DIR. */
static const char *include_for_ccache(const char *dir, int compiles) {
    if (empty_build_env_include(dir)) {
        return NULL;
    }
    const char *linked = compiles ? through_build_env_link(dir) : NULL;
    return linked != NULL ? linked : dir;
}

/* Whether ccache's depend mode is on: CCACHE_DEPEND set to anything but what ccache reads as
 * false. */
static int depend_mode(void) {
    const char *value = getenv("CCACHE_DEPEND");
    return value != NULL && strcasecmp(value, "0") != 0 && strcasecmp(value, "false") != 0
           && strcasecmp(value, "disable") != 0 && strcasecmp(value, "no") != 0;
}

static int c_or_cxx_source(const char *arg) {
    static const char *const suffixes[] = {".c", ".cc", ".cpp", ".cxx", ".c++", ".cp", ".C", ".CPP"};
    const char *dot = strrchr(arg, '.');
    for (size_t i = 0; dot != NULL && i < sizeof suffixes / sizeof *suffixes; i++) {
        if (strcmp(dot, suffixes[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Options whose value is the next argument (a path that may end in .c is not a source). */
static int takes_value(const char *option) {
    static const char *const options[] = {"-o", "-I", "-include", "-imacros", "-isystem",
                                          "-iquote", "-idirafter", "-isysroot", "--sysroot",
                                          "-D", "-U", "-L", "-l", "-Xlinker", "-Xassembler",
                                          "-Xpreprocessor", "-aux-info", "--param", "-T"};
    for (size_t i = 0; i < sizeof options / sizeof *options; i++) {
        if (strcmp(option, options[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* A compile of one C or C++ source that asks for no dependency file (and no preprocessed or
 * assembler output, no language of its own choosing): one the wrapper gives a dependency file
 * so that ccache's depend mode applies. */
static int wants_dependency_file(const char *name, int argc, char **argv) {
    const char *tool = tool_of(name);
    if (strcmp(tool, "gcc") != 0 && strcmp(tool, "g++") != 0) {
        return 0;
    }
    int compile = 0, sources = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-c") == 0) {
            compile = 1;
        } else if (arg[0] == '@') {
            /* a response file: the compiler reads options from it that this program does not
             * see (a -MD -MF of its own, say); a dependency file added here could be a second */
            return 0;
        } else if (strncmp(arg, "-M", 2) == 0 || strncmp(arg, "-Wp,-M", 6) == 0
                   || strcmp(arg, "-E") == 0 || strcmp(arg, "-S") == 0
                   || strncmp(arg, "-x", 2) == 0 || strcmp(arg, "-") == 0
                   || strncmp(arg, "-save-temps", 11) == 0) {
            return 0;
        } else if (arg[0] != '-' && c_or_cxx_source(arg) && !takes_value(argv[i - 1])) {
            sources++;
        }
    }
    return compile && sources == 1;
}

static int emulated_program(const char *program) {
    return strstr(program, "qemu") != NULL || strstr(program, "binfmt") != NULL;
}

static const char *basename_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

/* The basename of the parent's executable: "dash", "ninja", "make" for a native build driver.
 * For an emulated one that is QEMU's interpreter ("qemu-arm", "arm-binfmt-P"), so the program
 * QEMU runs follows it: the first argument QEMU was given, the emulated program's path, as both
 * binfmt_misc (with or without the P flag) and a direct `qemu-arm PROGRAM` pass it
 * ("arm-binfmt-P:cmake"). White space becomes '_': the log's fields are space-separated. */
static const char *parent_program(void) {
    static char program[768];
    char link[64], target[512];
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
    snprintf(program, sizeof program, "%s", basename_of(target));
    if (emulated_program(program)) {
        char path[64], args[1024];
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)getppid());
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t got = fd >= 0 ? read(fd, args, sizeof args - 1) : -1;
        if (fd >= 0) {
            close(fd);
        }
        if (got > 0) {
            args[got] = '\0';
            size_t first = strlen(args);  /* argv[0], QEMU itself; argv[1] follows its NUL */
            if ((ssize_t)first + 1 < got && args[first + 1] != '\0') {
                size_t used = strlen(program);
                snprintf(program + used, sizeof program - used, ":%s", basename_of(args + first + 1));
            }
        }
    }
    for (char *c = program; *c != '\0'; c++) {
        if (*c == ' ' || *c == '\t' || *c == '\n') {
            *c = '_';
        }
    }
    return program;
}

/* Appends to a log in one write (O_APPEND: whole lines from parallel runs). */
static void append(const char *path, const char *text, size_t n) {
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, text, n) < 0) { /* a lost log line never fails a compile */ }
        close(fd);
    }
}

/* Records the run; returns whether it is a compile (-c). */
static int record(const char *name, int argc, char **argv) {
    int compiles = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0) {
            compiles = 1;
        }
    }
    const char *log = getenv("DOCKERARCH_TOOLCHAIN_LOG");
    if (log == NULL || *log == '\0') {
        return compiles;
    }
    struct utsname uts;
    if (uname(&uts) != 0) {
        strcpy(uts.machine, "unknown");
    }
    char line[1024];
    int n = snprintf(line, sizeof line, "%s %s %s %s\n", uts.machine, name,
                     compiles ? "compile" : "other", parent_program());
    if (n < 0) {
        return compiles;
    }
    if ((size_t)n >= sizeof line) {  /* cut, but still one line */
        n = (int)sizeof line - 1;
        line[n - 1] = '\n';
    }
    append(log, line, (size_t)n);
    return compiles;
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


/* The first line of a small file, without its newline ("" when there is none). */
static void read_line(const char *path, char *buf, size_t size) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return;
    }
    if (fgets(buf, (int)size, f) == NULL) {
        buf[0] = '\0';
    }
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
}

/* A distcc host token without its options: "10.0.0.5:3632/8,lzo" -> "10.0.0.5:3632". */
static void host_of(const char *token, char *out, size_t size) {
    size_t n = strcspn(token, "/,: \t");
    if (token[n] == ':' && token[n + 1] >= '0' && token[n + 1] <= '9') {  /* keep the port */
        n += 1 + strcspn(token + n + 1, "/,: \t");
    }
    if (n >= size) {
        n = size - 1;
    }
    memcpy(out, token, n);
    out[n] = '\0';
}

/* dockerarch-distcc COMPILER ARGS...: one compile through distcc, its place recorded. */
static int distribute(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "dockerarch-distcc: no compiler given\n");
        return 2;
    }
    const char *compiler = argv[1];
    const char *base = strrchr(compiler, '/') ? strrchr(compiler, '/') + 1 : compiler;
    const char *tool = strstr(base, "-g++") ? "g++" : strstr(base, "-gcc") ? "gcc" : NULL;
    char hosts[4096], id[128];
    read_line(FARM_HOSTS, hosts, sizeof hosts);
    read_line(TOOLCHAIN_ID, id, sizeof id);
    int compiles = 0;
    for (int i = 2; i < argc; i++) {
        compiles |= strcmp(argv[i], "-c") == 0;
    }
    /* A link or a probe is not a compile distcc sends anywhere: it runs here, unrecorded. */
    if (tool == NULL || !compiles || hosts[0] == '\0' || strlen(id) < 16) {
        execv(compiler, argv + 1);
        fprintf(stderr, "dockerarch-distcc: cannot run %s: %s\n", compiler, strerror(errno));
        return 127;
    }
    char name[256];
    snprintf(name, sizeof name, "dockerarch-%.16s-%s-%s", id, TRIPLET, tool);
    char log[] = "/tmp/dockerarch-distcc.XXXXXX";
    int fd = mkstemp(log);
    if (fd < 0) {
        fprintf(stderr, "dockerarch-distcc: cannot make a log file: %s\n", strerror(errno));
        return 127;
    }
    close(fd);
    pid_t pid = fork();
    if (pid < 0) {
        unlink(log);
        return 127;
    }
    if (pid == 0) {
        char path[4096];
        const char *old = getenv("PATH");
        snprintf(path, sizeof path, "%s:%s", FARM_NAMES, old ? old : "/usr/bin:/bin");
        mkdir("/tmp/dockerarch-distcc", 0700);  /* distcc's slot locks and back-off state */
        setenv("PATH", path, 1);
        setenv("DISTCC_HOSTS", hosts, 1);
        setenv("DISTCC_LOG", log, 1);
        setenv("DISTCC_VERBOSE", "1", 1);
        setenv("DISTCC_FALLBACK", "1", 1);
        setenv("DISTCC_DIR", "/tmp/dockerarch-distcc", 1);
        char **args = calloc((size_t)argc + 1, sizeof *args);
        if (args == NULL) {
            _exit(127);
        }
        args[0] = (char *)"distcc";
        args[1] = name;
        for (int i = 2; i < argc; i++) {
            args[i] = argv[i];
        }
        execv(DISTCC, args);
        fprintf(stderr, "dockerarch-distcc: cannot run %s: %s\n", DISTCC, strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    /* distcc's own words: "exec on HOST: ..." for each place it tried, the last being where the
     * compile ran (an earlier one failed: distcc said why in an ERROR line, and compiled here
     * instead), "failed to distribute SRC to HOST" too when it gave up on a server. */
    char place[256] = "localhost", failed[1024] = "", line[8192], reason[512] = "";
    int tried = 0;
    FILE *f = fopen(log, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        char host[256] = "";
        char *at = strstr(line, "] exec on ");
        if (at != NULL) {
            if (tried++ > 0) {
                snprintf(host, sizeof host, "%s", place);  /* the one before failed */
            }
            host_of(at + strlen("] exec on "), place, sizeof place);
        } else if ((at = strstr(line, "failed to distribute ")) != NULL) {
            /* "failed to distribute SRC to HOST, running locally instead": the last " to " */
            char *to = NULL;
            for (char *next = at + strlen("failed to distribute "); (next = strstr(next, " to ")) != NULL;
                 next += 4) {
                to = next;
            }
            if (to != NULL) {
                host_of(to + 4, host, sizeof host);
            }
        }
        if (host[0] != '\0' && strcmp(host, "localhost") != 0 && strstr(failed, host) == NULL
            && strlen(failed) + strlen(host) + 2 < sizeof failed) {
            strcat(failed, failed[0] ? "," : "");
            strcat(failed, host);
        }
        at = strstr(line, "ERROR: ");
        if (at != NULL && reason[0] == '\0') {
            snprintf(reason, sizeof reason, "%s", at + strlen("ERROR: "));
            reason[strcspn(reason, "\n")] = '\0';
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    unlink(log);
    if (code != 0) {
        /* It failed here too: a compile error (a configure test's, say), which distcc retried
         * locally to show; no server failed it. */
        failed[0] = '\0';
    }
    if (failed[0] != '\0') {
        fprintf(stderr, "dockerarch-distcc: farm server %s failed (%s): compiled on %s instead\n",
                failed, reason[0] ? reason : "no reason given", place);
    }
    const char *farm_log = getenv("DOCKERARCH_FARM_LOG");
    if (farm_log != NULL && *farm_log != '\0') {
        char out[1536];
        int n = snprintf(out, sizeof out, "%s %s%s%s\n", place, code == 0 ? "ok" : "failed",
                         failed[0] ? " retried-after " : "", failed);
        if (n > 0) {
            append(farm_log, out, (size_t)n < sizeof out ? (size_t)n : sizeof out - 1);
        }
    }
    return code;
}

static int farm_given(void) {
    char hosts[16];
    read_line(FARM_HOSTS, hosts, sizeof hosts);
    return hosts[0] != '\0' && access(DISTCC, X_OK) == 0;
}

/* The file that says the shared cache failed this build: beside the build's stats log. */
static void remote_down_path(const char *stats, char *out, size_t size) {
    snprintf(out, size, "%s.remote-down", stats);
}

/* ccache's keys from the toolchain's digest; the shared cache (if given) under it, unless it
 * already failed this build. Returns 1 when the shared cache is to be asked. */
static int use_toolchain_keys(int compiles) {
    char id[128], remote[4096], check[160], storage[4300], down[4200];
    read_line(TOOLCHAIN_ID, id, sizeof id);
    if (strlen(id) < 16) {
        return 0;
    }
    snprintf(check, sizeof check, "string:%s", id);
    setenv("CCACHE_COMPILERCHECK", check, 1);
    read_line(CACHE_REMOTE, remote, sizeof remote);
    if (remote[0] == '\0') {
        return 0;
    }
    const char *stats = getenv("CCACHE_STATSLOG");
    if (stats != NULL && *stats != '\0') {
        remote_down_path(stats, down, sizeof down);
        if (access(down, F_OK) == 0) {
            if (compiles) {
                static const char skipped[] = "# dockerarch-cc\nremote_storage_skipped\n";
                append(stats, skipped, sizeof skipped - 1);
            }
            return 0;
        }
    }
    size_t url = strcspn(remote, "|");
    snprintf(storage, sizeof storage, "%.*s/%.16s%s", (int)url, remote, id, remote + url);
    setenv("CCACHE_REMOTE_STORAGE", storage, 1);
    return stats != NULL && *stats != '\0';
}

/* A child's end as this program's own: its exit code, or the same signal. */
static int exit_code(int status) {
    if (WIFSIGNALED(status)) {
        signal(WTERMSIG(status), SIG_DFL);
        kill(getpid(), WTERMSIG(status));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ccache ARGS in a child process (with STATS_LOG, if given, as its stats log), waited for: its
 * wait status. Where no child can be made, ccache takes this process's place as it is. */
static int ccache_child(char **args, const char *stats_log) {
    pid_t pid = fork();
    if (pid < 0) {
        execv(CCACHE, args);
        return 127 << 8;
    }
    if (pid == 0) {
        if (stats_log != NULL) {
            setenv("CCACHE_STATSLOG", stats_log, 1);
        }
        execv(CCACHE, args);
        fprintf(stderr, "dockerarch-cc: cannot run %s: %s\n", CCACHE, strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

/* ccache ARGS with the shared cache: its counters go to a file of this run's own, then to the
 * build's stats log; a failure of the shared cache leaves <stats log>.remote-down. */
static int ccache_watched(char **args) {
    const char *stats = getenv("CCACHE_STATSLOG");
    char own[4200], down[4200], counters[65536];
    snprintf(own, sizeof own, "%s.%d", stats, (int)getpid());
    remote_down_path(stats, down, sizeof down);
    int status = ccache_child(args, own);  /* no child: ccache alone, its counters unread */
    ssize_t n = 0;
    int fd = open(own, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, counters, sizeof counters - 1);
        close(fd);
        unlink(own);
    }
    if (n > 0) {
        counters[n] = '\0';
        append(stats, counters, (size_t)n);
        if (strstr(counters, "\nremote_storage_error") != NULL
            || strstr(counters, "\nremote_storage_timeout") != NULL) {
            append(down, "", 0);
        }
    }
    return exit_code(status);
}

int main(int argc, char **argv) {
    const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc == 2 && strcmp(argv[1], "--report") == 0) {
        return report();
    }
    if (strcmp(name, "dockerarch-distcc") == 0) {
        return distribute(argc, argv);
    }
    int compiles = record(name, argc, argv);
    const char *compiler = real_compiler(name);
    const char *use_ccache = getenv("DOCKERARCH_CCACHE");
    int farm = farm_given();
    if ((use_ccache == NULL || strcmp(use_ccache, "0") != 0) && access(CCACHE, X_OK) == 0) {
        if (farm) {  /* ccache in front: only what it must compile goes to the farm */
            setenv("CCACHE_PREFIX", DISTCC_PREFIX, 1);
        }
        int shared = use_toolchain_keys(compiles);
        char dependencies[] = "/tmp/dockerarch-cc-deps.XXXXXX";
        int own_deps = 0;
        if (depend_mode() && wants_dependency_file(name, argc, argv)) {
            int fd = mkstemp(dependencies);
            if (fd >= 0) {
                close(fd);
                own_deps = 1;
            }
        }
        char **args = calloc((size_t)argc + 5, sizeof *args);
        if (args == NULL) {
            return 127;
        }
        args[0] = (char *)CCACHE;
        args[1] = (char *)compiler;
        int n = 2;
        for (int i = 1; i < argc; i++) {
            /* -IDIR, -I DIR, -isystemDIR, -isystem DIR */
            const char *option = strncmp(argv[i], "-isystem", 8) == 0 ? "-isystem"
                                 : strncmp(argv[i], "-I", 2) == 0    ? "-I"
                                                                      : NULL;
            size_t skip = option != NULL ? strlen(option) : 0;
            int separate = option != NULL && argv[i][skip] == '\0';
            if (option == NULL || (separate && i + 1 >= argc)) {
                args[n++] = argv[i];
                continue;
            }
            const char *dir = separate ? argv[i + 1] : argv[i] + skip;
            const char *given = include_for_ccache(dir, compiles);
            if (given == NULL) {
                i += separate;
            } else if (separate) {
                args[n++] = argv[i++];
                args[n++] = (char *)given;
            } else if (given == dir) {
                args[n++] = argv[i];
            } else {
                char *joined = malloc(skip + strlen(given) + 1);
                if (joined == NULL) {
                    return 127;
                }
                sprintf(joined, "%s%s", option, given);
                args[n++] = joined;
            }
        }
        if (own_deps) {
            args[n++] = (char *)"-MD";
            args[n++] = (char *)"-MF";
            args[n++] = dependencies;
            int code = shared ? ccache_watched(args) : exit_code(ccache_child(args, NULL));
            unlink(dependencies);
            return code;
        }
        if (shared) {
            return ccache_watched(args);
        }
        execv(CCACHE, args);
    }
    if (farm) {
        for (int i = 1; i < argc; i++) {
            if (strcmp(argv[i], "-c") == 0) {  /* a compile without ccache: to the farm */
                char **args = calloc((size_t)argc + 2, sizeof *args);
                if (args == NULL) {
                    return 127;
                }
                args[0] = (char *)DISTCC_PREFIX;
                args[1] = (char *)compiler;
                for (int j = 1; j < argc; j++) {
                    args[j + 1] = argv[j];
                }
                return distribute(argc + 1, args);
            }
        }
    }
    argv[0] = (char *)compiler;
    execv(compiler, argv);
    fprintf(stderr, "dockerarch-cc: cannot run %s: %s\n", compiler, strerror(errno));
    return 127;
}
