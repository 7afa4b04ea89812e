"""hwnas's benchmarks: each module ``benchmarks/<name>.py`` is one benchmark, run as
``python -m benchmarks <name> [options]`` (``python -m benchmarks --list`` names them); ``harness`` holds
what they share.  Not part of the installed package: run them from a checkout."""
