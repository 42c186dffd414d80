"""The shard format: member names, the .npy image codec, the manifest and its validation (`schema`), and atomic
file writes (`atomic`). Numpy only."""
