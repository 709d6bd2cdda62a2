# expect: fail
# Class 1: replace the grader's own functions inside the sandbox (run_case) so that anything would pass; the
# grader compares the outputs outside, so only this sandbox's own report can change.
import course_lib.exercises.core as core

core.run_case = lambda impl, case, **kwargs: case.args[0]


def stable_softmax(x, dim=-1):
    return x
