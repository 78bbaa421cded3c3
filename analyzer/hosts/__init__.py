"""analyzer/hosts"""
