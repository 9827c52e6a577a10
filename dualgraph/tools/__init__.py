"""Tools over the whole library (STYLE.md's top layer): the command line's commands, each in
its own module (``show_cli``: ``dualgraph show FILE``)."""
