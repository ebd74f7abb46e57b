"""IMDB's second model, a Transformer encoder classifier (run set imdb-transformer): one module per
framework, each the LSTM's workload (imdb/<framework>.py: data, loader, optimizer, schedule) with its own
model and weight loading."""
