"""asaptrace: where MoE prefill time goes, and how much an asynchronous disaggregated design wins back."""

__version__ = "0.1.0"
