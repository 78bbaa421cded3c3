"""The capture as platform-neutral tables: devices, op events and metadata from TPU, GPU and CPU planes, sanity
checks."""
