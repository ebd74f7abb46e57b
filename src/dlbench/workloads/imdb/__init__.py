"""IMDB, the study's LSTM sentiment classifier (one folder: dlbench.workloads says what it holds; task.py is the part every framework shares)."""
