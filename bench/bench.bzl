"""A benchmark program: bench/<name>.c, built with rbtrace's compiler flags."""

load("//build_defs:copts.bzl", "RBT_COPTS")

def rbt_bench(name, **kwargs):
    native.cc_binary(
        name = name,
        srcs = [name + ".c"],
        copts = RBT_COPTS,
        **kwargs
    )
