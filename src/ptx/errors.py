"""Errors of the fast analyzer (count_launch); raised from its semantics, driver and public entry alike."""

from __future__ import annotations


class UnresolvedBranchError(RuntimeError):
    """A branch or guard depends on data not known from the launch (memory, missing parameter)."""

    def __init__(self, branches: list[str]):
        self.branches = branches
        super().__init__("branches depend on values not known from the launch (use policy='bounds', "
                         "'taken', 'not_taken' or 'probability:P'): " + "; ".join(branches))


class AnalysisError(RuntimeError):
    """The launch cannot be analysed (bad arguments, non-terminating evaluation)."""
