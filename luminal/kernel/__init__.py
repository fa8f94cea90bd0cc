"""The kernel layer, below the schedule and above every renderer: what a kernel computes
and how it addresses memory, independent of the language it is written in.

`indexing` holds the index arithmetic every renderer shares (flat positions of logical
indices and back, loop indices in a namespace of their own). The kernel IR of issue 12
(loops with a kind, loads/stores through views, ALU ops) will live here too.
"""
