"""The command-line layer: one small module per command (options -> stages -> run).

The library (``tarproc.*``) never imports this package.
"""
