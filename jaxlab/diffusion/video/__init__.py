"""Audio-driven video diffusion: Loopy (long-term motion dependency) and CyberHost (region
attention for talking bodies), with video building blocks, synthetic audio-visual data and
measurements.

References: Jiang et al. 2025, "Loopy: Taming Audio-Driven Portrait Avatar with Long-Term Motion
Dependency" (ICLR 2025); Lin et al. 2025, "CyberHost: A One-stage Diffusion Framework for
Audio-driven Talking Body Generation" (ICLR 2025).
"""
