"""The man pages man/help2roff.py makes: rbtrace(1) and one per subcommand.

A new subcommand is one word in CMDS (help2roff.py fails while `rbtrace --help`
lists another set)."""

CMDS = [
    "record",
    "info",
    "dump",
    "replay",
    "diff",
    "report",
    "export",
    "softnic",
    "snapshot",
]

MAN_PAGES = ["rbtrace.1"] + ["rbtrace-%s.1" % c for c in CMDS]
