"""The shapes of tests/BUILD.bazel's targets, said once.

rbt_gtest: a GoogleTest test NAME.cc (gtest_main unless main = False).
rbt_sh_test: a shell test NAME.sh with tests/lib.sh beside it.
recording = True (either test) adds what recording over softnic runs: rbtrace,
the recorder, softnic.
rbt_binary: a C program or fixture writer NAME.c (src: another file), with the
house's C flags; rbt_prog: a verbs test program progs/NAME.c.
Each takes modes = True for a twin per softnic mode (softnic_mode.bzl); any
other attribute goes to the rule as it is.
"""

load("//build_defs:copts.bzl", "RBT_COPTS", "RBT_CXXOPTS")
load(":softnic_mode.bzl", "softnic_modes")

# What a test that records programs over softnic runs.
RECORDING = [
    "//cli:rbtrace",
    "//interpose:librbtrace.so",
    "//softnic:libibverbs.so.1",
]

def _merge(*lists):
    out = []
    for l in lists:
        for x in l:
            if x not in out:
                out.append(x)
    return out

def _make(rule, modes, **kwargs):
    if modes:
        softnic_modes(rule, **kwargs)
    else:
        rule(**kwargs)

def rbt_gtest(name, srcs = [], data = [], deps = [], main = True, recording = False, modes = False, **kwargs):
    _make(
        native.cc_test,
        modes,
        name = name,
        srcs = [name + ".cc"] + srcs,
        copts = RBT_CXXOPTS,
        data = _merge(RECORDING if recording else [], data),
        deps = deps + ["@googletest//:gtest_main" if main else "@googletest//:gtest"],
        **kwargs
    )

def rbt_sh_test(name, data = [], recording = False, modes = False, **kwargs):
    _make(
        native.sh_test,
        modes,
        name = name,
        srcs = [name + ".sh"],
        data = _merge([":lib.sh"], RECORDING if recording else [], data),
        **kwargs
    )

def rbt_binary(name, src = None, copts = [], **kwargs):
    native.cc_binary(
        name = name,
        srcs = [src or name + ".c"],
        copts = RBT_COPTS + copts,
        **kwargs
    )

def rbt_prog(name, deps = [":prog_util"], **kwargs):
    """A verbs test program, progs/NAME.c, on prog_util unless deps say otherwise."""
    rbt_binary(name = name, src = "progs/%s.c" % name, deps = deps, **kwargs)
