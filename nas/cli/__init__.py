"""The commands: one thin module each (config -> settings -> one library call -> print).

``python -m nas.<command>`` and the console scripts ``hwnas-<command>`` both land here.
"""
