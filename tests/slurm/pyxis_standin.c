/*
 * pyxis_standin.c - TEST-ONLY SPANK plugin that stands in for NVIDIA's pyxis on the test Slurm.
 *
 * pyxis is not packaged for Debian, so the test cluster (scripts/testslurm, docs/slurm.md) loads
 * this plugin instead. It registers the same srun/sbatch options as pyxis 0.24.0 (their names,
 * arguments and meaning are recorded in dlperf_tasks/remote/pyxis_options.json, read from
 * pyxis's args.c), and does what pyxis does with them, with Docker in place of enroot:
 *
 *   slurm_spank_user_init (slurmstepd, once per step and node): the helper script
 *       tests/slurm/pyxis-standin starts a container of --container-image (enroot URI
 *       [USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]) with --container-mounts, pulling with the
 *       site's enroot credentials file; a --container-name container is reused by later steps;
 *   slurm_spank_task_init (each task, after Slurm's chdir, before exec): the task joins the container's
 *       mount namespace (setns, as pyxis does with enroot's container) and changes to
 *       --container-workdir (else the image's WORKDIR), so the step's command runs in the image;
 *   slurm_spank_exit: an unnamed container is removed; slurm_spank_job_epilog removes the job's
 *       named ones.
 *
 * Plugin arguments (plugstack.conf): helper=PATH cluster=LABEL credentials=PATH.
 * Options it accepts but does not act on (nothing here differs for them): --container-save,
 * --container-remap-root, --container-entrypoint(-log), --container-writable/-readonly,
 * --container-env, --container-unshare.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(pyxis_standin, 1);

enum { O_IMAGE, O_MOUNTS, O_WORKDIR, O_NAME, O_SAVE, O_MOUNT_HOME, O_REMAP_ROOT, O_ENTRYPOINT,
       O_ENTRYPOINT_LOG, O_WRITABLE, O_ENV, O_UNSHARE, O_COUNT };

static char *values[O_COUNT];
static int flags[O_COUNT];      /* -1 unset, 0 the no- form, 1 the positive form */
static char helper[PATH_MAX], cluster[256], credentials[PATH_MAX];
static pid_t container_pid;
static int start_failed;   /* user_init's failure is reported by task_init, as pyxis does */
static char container_workdir[PATH_MAX], container_id[256];

static int take(int val, const char *optarg, int remote)
{
    int key = val / 2;
    (void)remote;
    if (key < 0 || key >= O_COUNT)
        return -1;
    if (optarg != NULL) {
        if (*optarg == '\0') {
            slurm_error("pyxis: option argument required");
            return -1;
        }
        free(values[key]);
        values[key] = strdup(optarg);
    }
    flags[key] = val % 2;
    return 0;
}

#define OPT(name, arg, usage, key, positive) \
    { (char *)name, (char *)arg, (char *)"[pyxis] " usage, arg != NULL, (key) * 2 + (positive), take }

static struct spank_option options[] = {
    OPT("container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH", "the image to use for the container filesystem",
        O_IMAGE, 1),
    OPT("container-mounts", "SRC:DST[:FLAGS][,SRC:DST...]", "bind mount[s] inside the container", O_MOUNTS, 1),
    OPT("container-workdir", "PATH", "working directory inside the container", O_WORKDIR, 1),
    OPT("container-name", "NAME", "name to use for saving and loading the container on the host", O_NAME, 1),
    OPT("container-save", "PATH", "Save the container state to a squashfs file (accepted, not done here)",
        O_SAVE, 1),
    OPT("container-mount-home", NULL, "bind mount the user's home directory", O_MOUNT_HOME, 1),
    OPT("no-container-mount-home", NULL, "do not bind mount the user's home directory", O_MOUNT_HOME, 0),
    OPT("container-remap-root", NULL, "ask to be remapped to root inside the container", O_REMAP_ROOT, 1),
    OPT("no-container-remap-root", NULL, "do not remap to root inside the container", O_REMAP_ROOT, 0),
    OPT("container-entrypoint", NULL, "execute the entrypoint from the container image", O_ENTRYPOINT, 1),
    OPT("no-container-entrypoint", NULL, "do not execute the entrypoint from the container image",
        O_ENTRYPOINT, 0),
    OPT("container-entrypoint-log", NULL, "print the output of the entrypoint script", O_ENTRYPOINT_LOG, 1),
    OPT("container-writable", NULL, "make the container filesystem writable", O_WRITABLE, 1),
    OPT("container-readonly", NULL, "make the container filesystem read-only", O_WRITABLE, 0),
    OPT("container-env", "NAME[,NAME...]", "names of environment variables to override with the host environment",
        O_ENV, 1),
    OPT("container-unshare", "NS[,NS...]", "create new namespaces for the container", O_UNSHARE, 1),
    SPANK_OPTIONS_TABLE_END
};

static void plugin_args(int ac, char **av)
{
    for (int i = 0; i < ac; i++) {
        if (strncmp(av[i], "helper=", 7) == 0)
            snprintf(helper, sizeof(helper), "%s", av[i] + 7);
        else if (strncmp(av[i], "cluster=", 8) == 0)
            snprintf(cluster, sizeof(cluster), "%s", av[i] + 8);
        else if (strncmp(av[i], "credentials=", 12) == 0)
            snprintf(credentials, sizeof(credentials), "%s", av[i] + 12);
    }
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    plugin_args(ac, av);
    for (int i = 0; i < O_COUNT; i++)
        flags[i] = -1;
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR)
        return 0;
    for (struct spank_option *o = options; o->name != NULL; o++)
        if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
            slurm_error("pyxis: could not register --%s", o->name);
            return -1;
        }
    return 0;
}

/* Run the helper with argv; its first output line goes to out. Returns its exit status. */
static int run_helper(char *const argv[], char *out, size_t out_len)
{
    int fds[2], status = 0;
    pid_t pid;
    if (pipe(fds) != 0)
        return -1;
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t n;
    while (out && got + 1 < out_len && (n = read(fds[0], out + got, out_len - 1 - got)) > 0)
        got += (size_t)n;
    if (out)
        out[got] = '\0';
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    uint32_t job = 0, step = 0;
    char job_s[32], step_s[32], out[1024], *node = getenv("DLPERF_SLURM_NODE");
    (void)ac;
    (void)av;
    if (spank_context() != S_CTX_REMOTE || values[O_IMAGE] == NULL)
        return 0;
    spank_get_item(sp, S_JOB_ID, &job);
    spank_get_item(sp, S_JOB_STEPID, &step);
    snprintf(job_s, sizeof(job_s), "%u", job);
    snprintf(step_s, sizeof(step_s), "%u", step);
    /* pyxis's own lines, where pyxis prints them (slurm_spank_log: the step's output): "importing" only
       when the step has one task (it may be interactive), "imported" after every import */
    uint32_t tasks = 0;
    if (spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &tasks) == ESPANK_SUCCESS && tasks <= 1)
        slurm_spank_log("pyxis: importing docker image: %s", values[O_IMAGE]);
    char *argv[] = { helper, "start", job_s, step_s, node ? node : "", cluster, credentials, values[O_IMAGE],
                     values[O_MOUNTS] ? values[O_MOUNTS] : "", values[O_NAME] ? values[O_NAME] : "",
                     flags[O_MOUNT_HOME] == 0 ? "0" : "1", NULL };
    int rc = run_helper(argv, out, sizeof(out));
    if (rc != 0 || sscanf(out, "%d %4095s %255s", &container_pid, container_workdir, container_id) != 3) {
        slurm_error("pyxis: failed to start a container of %s (helper exit %d)", values[O_IMAGE], rc);
        start_failed = 1;
        return 0;   /* Slurm reports a failed user_init as a successful step: fail in task_init */
    }
    slurm_spank_log("pyxis: imported docker image: %s", values[O_IMAGE]);
    return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    char path[64];
    (void)sp;
    (void)ac;
    (void)av;
    if (start_failed)
        return -1;
    if (container_pid <= 0)
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/ns/mnt", container_pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNS) != 0) {
        slurm_error("pyxis: could not join the container's mount namespace (%s): %m", path);
        return -1;
    }
    close(fd);
    const char *wd = values[O_WORKDIR] ? values[O_WORKDIR] : container_workdir;
    if (chdir(wd) != 0) {
        slurm_error("pyxis: couldn't chdir to %s: %m", wd);
        return -1;
    }
    return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    if (spank_context() == S_CTX_REMOTE && container_pid > 0 && values[O_NAME] == NULL) {
        char *argv[] = { helper, "stop", container_id, NULL };
        run_helper(argv, NULL, 0);
    }
    return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    uint32_t job = 0;
    char job_s[32];
    plugin_args(ac, av);
    if (helper[0] == '\0' || spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
        return 0;
    snprintf(job_s, sizeof(job_s), "%u", job);
    char *argv[] = { helper, "stop-job", job_s, cluster, NULL };
    run_helper(argv, NULL, 0);
    return 0;
}
