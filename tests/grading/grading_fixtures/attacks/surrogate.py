# expect: error
# Class 3: an exception message with a lone surrogate and other unencodable text.
def stable_softmax(x, dim=-1):
    raise ValueError("\udc80 \ud800 \x00 \x1b[31m")
