"""analyzer/chips"""
