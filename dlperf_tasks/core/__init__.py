"""The core: the data model, samples, topology, errors and the one settings object. Imports nothing else of dlperf."""
