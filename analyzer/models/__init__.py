"""analyzer/models"""
