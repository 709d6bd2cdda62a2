# expect: fail
# Checks in reach: replace the exercise machinery's comparison and observation inside the sandbox, then write
# into the input (wrong by the course's rules). The verdict is made outside, from the inputs sent back.
import course_lib.exercises.feedback as feedback
import course_lib.exercises.observation as observation

feedback.compare_outputs = lambda *args, **kwargs: []
observation.observation_problems = lambda *args, **kwargs: []
observation.same_plain = lambda *args, **kwargs: True


def stable_softmax(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)
    x.exp_()
    x /= x.sum(dim=dim, keepdim=True)
    return x
