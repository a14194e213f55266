"""Pure rules of the problem: slugs, names that are not memory, view paths, history names,
the MEMORY.md union and PREAMBLE.md's rendering.

Contract: no I/O of any kind, no threads, no clock reads that change a result's bytes
except where a function takes "now" as an argument. Imports nothing of memfs but this
layer; never pyfuse3 or trio. Every function is safe from any thread.
"""
