"""Evaluation of learned representations: kNN monitor and linear probe."""

from fedspectral.eval.evaluate import encoder_features, evaluate_encoder
from fedspectral.eval.knn import extract_features, knn_accuracy, knn_predict
from fedspectral.eval.linear_probe import fit_logistic, linear_probe, logistic_probe

__all__ = [
    "encoder_features",
    "evaluate_encoder",
    "extract_features",
    "fit_logistic",
    "knn_accuracy",
    "knn_predict",
    "linear_probe",
    "logistic_probe",
]
