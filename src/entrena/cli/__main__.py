"""``python -m entrena.cli``: the same as the ``entrena`` console script."""

from entrena.cli import main

main()
