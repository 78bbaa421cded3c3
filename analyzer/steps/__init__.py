"""analyzer/steps"""
