"""Tests that run programs over softnic, instantiated once per softnic mode.

softnic_modes(sh_test, name = "x_test", ...) makes x_test (the drop-in
libibverbs.so.1) and x_test_provider (softnic as a provider under the
system's libibverbs, with its preload). Each gets RBTRACE_SOFTNIC_MODE,
the one variable the test helpers (tests/lib.sh, softnic_mode.h) and
`rbtrace softnic|record|replay --softnic` read.
"""

def softnic_modes(rule, name, env = {}, data = [], tags = [], **kwargs):
    for mode, suffix in [("dropin", ""), ("provider", "_provider")]:
        e = dict(env)
        e["RBTRACE_SOFTNIC_MODE"] = mode
        d = list(data)
        if mode == "provider":
            d.append("//softnic/provider")
        rule(
            name = name + suffix,
            env = e,
            data = d,
            tags = tags + ["softnic_" + mode],
            **kwargs
        )
