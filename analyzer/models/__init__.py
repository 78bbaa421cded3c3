"""Pricing: the roofline of every op and the collective model on the chip's topology."""
