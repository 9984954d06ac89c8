"""The discrete-event core: a virtual clock and the loop that drives workers."""
