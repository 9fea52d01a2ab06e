"""Audio-driven video diffusion: Loopy (long-term motion dependency) and CyberHost (region
attention for talking bodies), with video building blocks, synthetic audio-visual data and
measurements (see ``../shared/papers/diffusion.md`` §4-5)."""
