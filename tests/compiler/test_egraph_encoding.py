"""What the e-graph receives is what the program says: shared terms are named without
egglog globals, every literal survives the round trip, and a decoded output that
changed shape is a CompileError.

egglog's `let` binds each literal a term repeats to a global, and egglog 13 could read
one global in place of another: a Qwen2-0.5B decoder's `sum_reduce(3, ..)` entered the
e-graph as `sum_reduce(43, ..)` in about one process in ten (the order of those globals
follows set iteration, so the hash seed and the memory layout picked the runs that
failed), and extraction stopped at "view does not fit its source".
"""

from __future__ import annotations

from collections import Counter

import egglog
import numpy as np
import pytest

import luminal as lm
from luminal import ops
from luminal.compiler.egraph import EGraphCompiler
from luminal.compiler.egraph import compiler as egraph_compiler
from luminal.compiler.egraph.extract import best_choice, decode_program
from luminal.compiler.egraph.program import Instruction, Program, program_from_region
from luminal.compiler.egraph.regions import split_regions
from luminal.compiler.passes import GenericCompiler
from luminal.errors import CompileError

TINY_QWEN2 = dict(
    model_type="qwen2",
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=50,
    max_position_embeddings=64,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)


def _decoder_program() -> Program:
    """A decoder step's largest region (a layer and the embedding; each layer ends in a
    graph break): many reductions over repeated axes, many boundaries."""
    graph = lm.models.Qwen2(lm.Graph(), TINY_QWEN2).session(compile=False).graph
    graph.compile(GenericCompiler())
    region = max(split_regions(graph, graph.output_roots()), key=lambda r: len(r.nodes))
    return program_from_region(graph, region.nodes, region.outputs)[0]


def _literals(program: Program) -> Counter:
    """Every op with its parameters (axes, constants, dtypes) and output shape; the
    e-graph holds a float constant as float32 holds it (-1 as -1.0)."""

    def op_key(inst: Instruction) -> str:
        if not isinstance(inst.op, ops.Constant):
            return repr(inst.op)
        value = np.float32(inst.op.value) if inst.dtype.is_float else inst.op.value
        return f"Constant({float(value)})"

    return Counter((op_key(i), i.shape, i.dtype) for i in program.instructions)


def test_shared_terms_reach_egglog_without_globals(monkeypatch):
    recorded: list[egglog.EGraph] = []

    def recording_egraph() -> egglog.EGraph:
        recorded.append(egglog.EGraph(save_egglog_string=True))
        return recorded[-1]

    monkeypatch.setattr(egraph_compiler, "EGraph", recording_egraph)
    program = _decoder_program()
    EGraphCompiler(rulesets=()).saturate(program)
    text = recorded[-1].as_egglog_string
    assert "Term_named" in text  # the residual stream is shared, so terms were named
    assert "(let " not in text and "$__expr" not in text


def test_round_trip_keeps_every_literal():
    program = _decoder_program()
    assert sum(isinstance(i.op, ops.SumReduce) for i in program.instructions) > 10
    saturation = EGraphCompiler(rulesets=()).saturate(program)
    graph = saturation.serialized
    decoded = decode_program(
        graph,
        saturation.tables,
        program.boundaries,
        saturation.output_classes,
        best_choice(graph),
        expected=program,
    )
    assert _literals(decoded) == _literals(program)
    assert decoded.output_signature() == program.output_signature()


def test_decoded_output_of_another_shape_is_a_compile_error():
    cx = lm.Graph()
    x = cx.tensor((3, 4), name="x")
    (x.exp2() + 1.0).retrieve()
    (region,) = split_regions(cx, cx.output_roots())
    program = program_from_region(cx, region.nodes, region.outputs)[0]
    saturation = EGraphCompiler(rulesets=()).saturate(program)
    last = program.instructions[-1]
    wider = Program(
        program.instructions[:-1] + (type(last)(last.op, last.inputs, (3, 5), last.dtype),),
        program.outputs,
        program.boundaries,
    )
    graph = saturation.serialized
    with pytest.raises(CompileError, match=r"output 0 decodes to shape \(3, 4\)"):
        decode_program(
            graph,
            saturation.tables,
            program.boundaries,
            saturation.output_classes,
            best_choice(graph),
            expected=wider,
        )
