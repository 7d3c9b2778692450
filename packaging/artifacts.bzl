"""rbtrace's install layout: the one list of what is installed where.

./dev install, ./dev deb and the install tests all read it (through the manifest
that //packaging:manifest writes from it, which packaging/install.sh follows).
Each entry is (label, destination under PREFIX, mode):
- @LIBDIR@ is lib, or lib/x86_64-linux-gnu when PREFIX is /usr (Debian's
  multiarch directory); PREFIX/lib/rbtrace/ is rbtrace's private directory, never
  on the default library path (softnic's drop-in is named libibverbs.so.1);
- mode "subst" installs a template with @PREFIX@, @LIBDIR@ and @VERSION@ filled in.
cli/rbt_cli.h (RBT_CLI_*_PATHS) must name the private paths the same way.
Add a part by adding its line here (and to its lookup in rbt_cli.h if rbtrace
loads it), nothing else: the install tests check every line was installed.
"""

load("//man:pages.bzl", "MAN_PAGES")

RBT_ARTIFACTS = [
    ("//cli:rbtrace", "bin/rbtrace", "0755"),
    ("//interpose:librbtrace.so", "lib/rbtrace/librbtrace.so", "0644"),
    # the replayer, dlopen()ed by `rbtrace replay` (cli/cmd_replay.c looks in
    # ../lib/rbtrace); the only part that links libibverbs
    ("//replay:librbtrace-replay.so", "lib/rbtrace/librbtrace-replay.so", "0644"),
    ("//softnic:libibverbs.so.1", "lib/rbtrace/softnic/libibverbs.so.1", "0644"),
    # the fake sysfs that `rbtrace softnic` preloads beside the drop-in
    ("//softnic:libsoftnic-sysfs.so", "lib/rbtrace/softnic/libsoftnic-sysfs.so", "0644"),
    # softnic's connection manager: found beside its libibverbs.so.1 by programs
    # that `rbtrace softnic` / `record --softnic` run (LD_LIBRARY_PATH)
    ("//softnic:librdmacm.so.1", "lib/rbtrace/softnic/librdmacm.so.1", "0644"),
    # provider mode: softnic under the system's libibverbs (private ABI 34), its
    # preload, and the connection manager alone in cm/ (no libibverbs.so.1 of
    # ours may sit on LD_LIBRARY_PATH there)
    ("//softnic/provider:libsoftnic-rdmav34.so", "lib/rbtrace/softnic/provider/libsoftnic-rdmav34.so", "0644"),
    ("//softnic/provider:libsoftnic-preload.so", "lib/rbtrace/softnic/provider/libsoftnic-preload.so", "0644"),
    ("//softnic/cm:librdmacm", "lib/rbtrace/softnic/cm/librdmacm.so.1", "0644"),
    ("//trace_format:librbtformat.so.1", "@LIBDIR@/librbtformat.so.1", "0644"),
    ("//trace_format:rbt_format.h", "include/rbtrace/rbt_format.h", "0644"),
    ("//packaging:rbtformat.pc.in", "@LIBDIR@/pkgconfig/rbtformat.pc", "subst"),
    ("//packaging:rbtrace.bash", "share/bash-completion/completions/rbtrace", "0644"),
    ("//python:rbtformat.py", "lib/python3/dist-packages/rbtformat.py", "0644"),
    ("//examples:wr_latency.c", "share/doc/rbtrace/examples/wr_latency.c", "0644"),
    ("//:README.md", "share/doc/rbtrace/README.md", "0644"),
    ("//docs:reader-api.md", "share/doc/rbtrace/reader-api.md", "0644"),
] + [("//man:" + p, "share/man/man1/" + p, "0644") for p in MAN_PAGES]

# (target, link name): symbolic links, made after the files.
RBT_LINKS = [
    ("librbtformat.so.1", "@LIBDIR@/librbtformat.so"),
]

def rbt_manifest_cmd():
    """A genrule command writing one line per artifact: "version X" first,
    then "file SRC DEST MODE" (SRC relative to the workspace root of bazel-bin or of the sources), then
    "link TARGET NAME"."""
    lines = ["file $(rootpath %s) %s %s" % a for a in RBT_ARTIFACTS]
    lines += ["link %s %s" % l for l in RBT_LINKS]
    version = ("echo version $$(sed -n 's/^#define RBT_VERSION \"\\(.*\\)\"$$/\\1/p' " +
               "$(location //build_defs:rbt_version.h))")
    return "(" + "; ".join([version] + ["echo '%s'" % l for l in lines]) + ") > $@"
