"""analyzer/capture"""
