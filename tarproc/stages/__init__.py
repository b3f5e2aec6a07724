"""Stages: functions from an iterator of samples to an iterator of samples."""
