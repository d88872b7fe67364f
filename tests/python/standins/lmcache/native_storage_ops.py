"""Stand-in for LMCache's C++ extension: its fixed-size Bitmap."""


class Bitmap:
    def __init__(self, n):
        self._bits = [False] * int(n)

    def set(self, i):
        self._bits[i] = True

    def test(self, i):
        return self._bits[i]

    def popcount(self):
        return sum(self._bits)

    def __len__(self):
        return len(self._bits)
