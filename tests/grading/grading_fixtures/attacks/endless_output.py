# expect: error
# Class 3: announce a frame of 2**60 bytes on the runner's pipe, then flood it.
import os
import struct

channel = int(os.environ.get("COURSE_GRADE_CHANNEL", "3"))
os.write(channel, struct.pack(">Q", 1 << 60))
while True:
    os.write(channel, bytes(1 << 20))


def stable_softmax(x, dim=-1):
    return x
