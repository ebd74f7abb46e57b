"""IMDB's Transformer, the part every framework shares: the LSTM's task (imdb/task.py: the reviews as
token sequences, the learning-rate schedule, test accuracy), which each framework's module inherits
through the LSTM's module of its framework. Nothing of its own: the same data and metric for both models."""
from dlbench.workloads.imdb.task import Imdb

ImdbTransformer = Imdb
