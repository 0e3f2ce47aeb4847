"""Dynamic code analysis of PTX: executed-instruction counts of a kernel launch without a GPU.

    module = parse_ptx(text)                       # PtxSyntaxError(line_no, line_text, message)
    counts = count_launch(module, "vector_add", grid=(4096,), block=(256,), params={"vector_add_param_3": 1 << 20})
"""

from src.ptx.cfg import Program, PtxUnsupportedError, build_program, def_use_chains
from src.ptx.count import LaunchCounts, count_launch
from src.ptx.errors import AnalysisError, UnresolvedBranchError
from src.ptx.interp import InterpResult, Interpreter, interpret
from src.ptx.isa import CLASSES
from src.ptx.parser import parse_ptx
from src.ptx.syntax import Function, Kernel, PtxModule, PtxSyntaxError

__all__ = [
    "AnalysisError", "CLASSES", "Function", "InterpResult", "Interpreter", "Kernel", "LaunchCounts", "Program",
    "PtxModule", "PtxSyntaxError", "PtxUnsupportedError", "UnresolvedBranchError", "build_program",
    "count_launch", "def_use_chains", "interpret", "parse_ptx",
]
