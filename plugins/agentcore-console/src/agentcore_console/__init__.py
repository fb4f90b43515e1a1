"""placeholder"""


class ConsolePage:
    pass
