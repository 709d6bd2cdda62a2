# expect: error
# Class 3: a 6.5 MB exercise cell (parsing it once cost 121 s and 1.6 GB): "too large", never parsed.
def stable_softmax(x, dim=-1):
    return x
