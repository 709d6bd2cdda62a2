# expect: fail
# Checks in reach: replace the exercise machinery's comparison and observation inside the sandbox, then write
# into the input (wrong by the course's rules). The verdict is made outside, from the inputs sent back.
import course_lib.exercises.compare as compare
import course_lib.exercises.observation as observation
import course_lib.exercises.verdict as verdict

compare.compare_outputs = lambda *args, **kwargs: []
verdict.compare_outputs = lambda *args, **kwargs: []
verdict.problems = lambda *args, **kwargs: []
observation.same_plain = lambda *args, **kwargs: True


def stable_softmax(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)
    x.exp_()
    x /= x.sum(dim=dim, keepdim=True)
    return x
