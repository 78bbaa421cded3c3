"""analyzer/hlo"""
