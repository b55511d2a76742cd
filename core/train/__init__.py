"""Training: the EAGLE head and the SlimSpec factors on the CPU or a GPU, on one shared loop."""
