"""An episode's recorded calls as the trainer takes them: what a record must be to be taken (``checks``) and
the calls turned into training samples (``samples``), both pure, and a sample's images as the model takes
them, read from the blob store (``sample_images``). Every subpackage above (GRPO, SFT, the backends, inspect)
trains or shows these samples."""
