"""Benchmark programs (bench/<name>.c) and the code they share (bench/<name>.c and
.h), built with rbtrace's compiler flags."""

load("//build_defs:copts.bzl", "RBT_COPTS")

def rbt_bench(name, **kwargs):
    native.cc_binary(
        name = name,
        srcs = [name + ".c"],
        copts = RBT_COPTS,
        **kwargs
    )

def rbt_bench_library(name, **kwargs):
    native.cc_library(
        name = name,
        srcs = [name + ".c"],
        hdrs = [name + ".h"],
        copts = RBT_COPTS,
        **kwargs
    )
