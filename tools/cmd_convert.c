/* cmd_convert.c: `iabn convert`, a thin launcher of tools/convert.py (the
 * PyTorch side needs torch's unpickler, which a C program cannot reuse).
 *
 * The script is found beside the program (the build tree), then in
 * ../libexec/iabn/ (an installed tree), or in $IABN_TOOLS_DIR; the
 * interpreter is $IABN_PYTHON or /usr/bin/python3 (Debian's python3-torch). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/commands.h"
#include "tools/options.h"

/* dir of the running program into buf (no trailing slash); 0 on success */
static int exe_dir(char *buf, size_t n)
{
    ssize_t k = readlink("/proc/self/exe", buf, n - 1);
    if (k <= 0) return -1;
    buf[k] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash) return -1;
    *slash = 0;
    return 0;
}

int iabn_find_script(const char *script, char *out, size_t n)
{
    if (!out || !n) return -1; /* and GCC's sanitizer build then knows out is not NULL */
    char dir[PATH_MAX];
    const char *env = getenv("IABN_TOOLS_DIR");
    if (env && *env) {
        snprintf(out, n, "%s/%s", env, script);
        if (access(out, R_OK) == 0) return 0;
    }
    if (exe_dir(dir, sizeof dir) == 0) {
        snprintf(out, n, "%s/%s", dir, script);
        if (access(out, R_OK) == 0) return 0;
        snprintf(out, n, "%s/../libexec/iabn/%s", dir, script);
        if (access(out, R_OK) == 0) return 0;
    }
    return -1;
}

int iabn_run_script(const char *cmd, const char *script, int argc, char **argv)
{
    char path[PATH_MAX + 64];
    if (iabn_find_script(script, path, sizeof path)) {
        fprintf(stderr, "iabn %s: %s is not installed beside the program (set IABN_TOOLS_DIR)\n",
                cmd, script);
        return 1;
    }
    const char *py = getenv("IABN_PYTHON");
    if (!py || !*py) py = "/usr/bin/python3";
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return 1;
    args[0] = (char *)py;
    args[1] = path;
    for (int i = 1; i < argc; i++) args[i + 1] = argv[i];
    /* the scripts call back into this program (iabn export --graph) */
    char self[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k > 0) {
        self[k] = 0;
        setenv("IABN_EXE", self, 1);
    }
    fflush(stdout);
    execv(py, args);
    fprintf(stderr, "iabn %s: cannot run %s: %s (it needs Python 3 with torch: "
                    "apt-get install python3-torch)\n", cmd, py, strerror(errno));
    free(args);
    return 1;
}

int iabn_cmd_convert(int argc, char **argv)
{
    iabn_args a; /* checked against the table; the script takes the same spelling */
    int rc = iabn_args_parse(&a, IABN_C_CONVERT, argc, argv);
    if (rc) return rc == IABN_ARGS_HELP ? 0 : 2;
    return iabn_run_script("convert", "convert.py", argc, argv);
}
